"""CDK stacks of the telemetry platform and the constructs they assemble."""
