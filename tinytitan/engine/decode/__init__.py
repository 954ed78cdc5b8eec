"""The decode step and its rows: plan → forward → fold on the model thread, and generated tokens into TokenEvents."""
