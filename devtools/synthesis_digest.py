"""`make synth` records what it synthesized: the digest of the synthesis inputs, taken before the
CDK CLI runs, goes beside cdk.out/ENV so the telemetry commands reuse that synthesis
(telemetry/shared/cloud_assembly.py environment_synthesis) instead of making their own."""

from telemetry.shared.cloud_assembly import synthesis_inputs_digest

if __name__ == "__main__":
    print(synthesis_inputs_digest())
