"""Training side: the Petastorm reader, models, the loop and evaluation."""
