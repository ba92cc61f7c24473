"""Helpers shared by the tests: real servers in threads or processes, clients, fakes."""
