"""The parts the actor-critic network (``model.py``) is composed of: encoders, recurrent cores,
policy and value heads, and gSDE's policy head."""
