"""The operator: kopf handlers, one idempotent reconcile, the rollout state machine, health and fallback."""
