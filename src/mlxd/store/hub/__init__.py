"""The Hugging Face hub: `download` (preflight, pull), `resume` (partial files), `verify`
(checksums the hub publishes)."""
