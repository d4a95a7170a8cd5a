"""prime-rl's environments as OpenEnv environments (`env-server openenv`), and NeMo Gym rows read from one."""
