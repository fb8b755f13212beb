"""What the daemon tells its operator while it runs: log lines and Prometheus metrics."""
