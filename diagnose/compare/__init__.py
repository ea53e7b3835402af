"""Comparing two written reports of one service: did the fix work (`diagnose diff`)."""
