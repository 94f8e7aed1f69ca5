"""Metrics and scorers (InfoSeek, E-VQA, short-answer judge, retrieval) and studies."""
