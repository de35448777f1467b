"""Conversations in and out of memory: ``formats`` reads the accepted input files into typed conversations;
``replay`` feeds them through an invoker, resumably and exactly once."""
