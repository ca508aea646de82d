"""The reference solutions of the course's steps: what the graders pass (tested in CI)."""
