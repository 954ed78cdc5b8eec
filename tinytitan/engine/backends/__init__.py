"""What serves a model: the backend interface and its implementations (MLX, scripted)."""
