"""Tests of analysis.arena."""
