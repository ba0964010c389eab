"""A guard's cycle: the steps it takes each time (steps.py), in the order
guarding.py lists them, the policy's verdict on each pod (judging.py), what
is done about it (acting.py), the long-lived guard (guardstate.py), and the
clean-up when a guard is deleted (finalizer.py). KubeRay's
raycluster_controller.go is the model."""
