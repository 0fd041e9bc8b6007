"""The Skills Protocol v0.1 methods, independent of transport."""
