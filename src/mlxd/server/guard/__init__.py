"""What runs before any route: `connections` (header timeout, connection cap in h11),
`middleware.Guard` (Host, Origin, auth, draining, body cap), `origin` (Origin rules)."""
