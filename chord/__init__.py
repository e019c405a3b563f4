"""chord"""
