"""One turn, planned once and driven by thin shells: chat turns, wrapped chatbots and their streams."""
