"""overlay/gossip"""
