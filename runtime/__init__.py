"""Running compiled artifacts: host execution per cluster and the simulated device."""
