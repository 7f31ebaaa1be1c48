"""`telemetry cluster ...`: the Service Fabric cluster's commands, one module each."""
