"""spark_analysis"""
