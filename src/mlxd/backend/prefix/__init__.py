"""The prefix cache: KV snapshots at prompt boundaries in RAM, their disk tier, and the token
trie that finds them."""
