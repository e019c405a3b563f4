"""overlay/runtime"""
