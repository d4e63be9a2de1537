"""The model layer: a whole model's convolutions (capture), its model zoo, and sweeps
that explore every unique problem. Imports core/ and measure/, never report/ or the CLI."""
