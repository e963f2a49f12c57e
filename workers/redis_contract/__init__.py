"""The Redis contract the gateway and the fleet share: the key layout (keys.py) and the Lua
scripts that read and write it (the .lua files here, composed and loaded by scripts.py).

Both sides run these scripts and nothing else on these keys' counts: the gateway's admission and
release (gateway.limits), the replicas' reaper (gateway.replicas), the controller's pin claims and
warm-ups (workers.engine_slots). It lives in `workers` because the gateway may import workers,
never the other way round.
"""
