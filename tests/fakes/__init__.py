"""Test helpers and fakes."""
