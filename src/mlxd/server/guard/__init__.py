"""What runs before any route: `connections` (header timeout, connection cap in h11),
`cors.Cors` (preflights and CORS headers for the allowed origins) and `middleware.Guard`
(Host and Origin checks, auth, draining, body cap)."""
