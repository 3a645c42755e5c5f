"""The GPU itself: datasheet rows, measured ceilings and machine profiles, the bench probes, card
health."""
