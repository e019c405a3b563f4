"""scribe"""
