"""os-ken controller apps of the testbed, and their launcher (os-ken 4.x ships none)."""
