"""The LC's websocket link to the GM: dialer (dial, redial, one session at a time), session,
apply (downstream objects), window (reports in flight), backoff, state (what /readyz and
/metrics show)."""
