"""Sessions: the managers users hold, the engine behind them and what it remembers between calls."""
