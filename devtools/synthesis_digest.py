"""`make synth` records what it synthesized: the digest of the synthesis inputs, taken before the
CDK CLI runs, goes beside cdk.out/ENV so the telemetry commands reuse that synthesis
(scripts/telemetry/cloud_assembly.py environment_synthesis) instead of making their own."""

from scripts.telemetry.cloud_assembly import synthesis_inputs_digest

if __name__ == "__main__":
    print(synthesis_inputs_digest())
