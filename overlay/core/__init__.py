"""overlay/core"""
