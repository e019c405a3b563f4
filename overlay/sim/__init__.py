"""overlay/sim"""
