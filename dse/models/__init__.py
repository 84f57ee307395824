"""A model, built for a number format: the builtin zoo (zoo), a user's own tinygrad function
(user_model), trained networks and their data (data, quantize, convnet, build), and accuracy on
real samples (accuracy)."""
