"""What the commands share, below them: errors and output formats, the cloud assembly and the
deployed stacks, Run Command and its output, the cluster's inventory and lock, prices."""
