"""Faults the tests inject into real hub processes, from outside the product."""
