"""Small helpers shared by samplers and processors."""
