"""What the commands share, below them: errors, output formats and argument types; the cloud
assembly and the deployed stacks; Run Command and its output; the cluster's inventory, lock and
scaling node group; prices and their tables."""
