"""The assignment kit: the student tree generator (make), the checker (check, checks) and the grader (grade)."""
