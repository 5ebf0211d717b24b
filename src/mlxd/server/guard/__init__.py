"""What runs before any route: `connections` (header timeout, connection cap in h11),
`cors.Cors` (preflights and CORS headers for the allowed origins), `middleware.Guard` (Host,
Origin, auth, draining, body cap), `origin` (Origin rules)."""
