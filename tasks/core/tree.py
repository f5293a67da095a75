"""Which tree this is: the reference, or a student tree written by python -m assignments.make --profile NAME."""
PROFILE = "reference"
STUDENT = PROFILE != "reference"
