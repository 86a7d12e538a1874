"""Multi-node models on Ray: cluster planning, Ray units and the cross-host preflight (all pure)."""
