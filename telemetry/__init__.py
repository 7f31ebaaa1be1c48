"""The operator command `telemetry`, in layers, each above what it imports:

- cli.py, the front door: the parser, `--version` and completion, the one error funnel;
- registry.py: the commands and how each one's command line is read (the deploy journey's too);
- deploy/, `telemetry deploy`: the first deployment, above the commands its steps run;
- commands/, one module per command (`telemetry cluster drain`: commands/cluster/drain.py);
- shared/, what the commands share: errors and output formats, the cloud assembly and the deployed
  stacks, Run Command and its output, the cluster's inventory and lock, prices.
"""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent  # the checkout: cdk.json, cdk.out/, cluster-config/
