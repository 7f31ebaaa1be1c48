package='{{ simulatorPackage }}'
# One install per simulator version, kept for later runs and shared by the fleet's documents.
home="/opt/telemetry-simulator/$(printf '%s' "$package" | sha256sum | cut -c1-16)"
# A failed install exits 3 with what failed, so the workstation does not read it as the program's
# own answer (telemetry topics: 1 is a difference Kafka cannot make).
install_failed() { echo "install failed (exit $1): $2" >&2; exit 3; }
if [ ! -f "$home/.installed" ]; then
  trap 'install_failed $? "$BASH_COMMAND"' ERR
  dnf install -y -q python3.11 unzip
  rm -rf "$home" && mkdir -p "$home"
  aws s3 cp --only-show-errors "$package" "$home/simulator.zip"
  unzip -q "$home/simulator.zip" -d "$home/simulator"
  python3.11 -m venv "$home/venv"
  # Every package pinned with its files' SHA-256 (make simulator-lock): a file the lock does not
  # name, or a dependency it does not list, is refused.
  "$home/venv/bin/pip" install --quiet --require-hashes --no-deps -r "$home/simulator/requirements.lock"
  touch "$home/.installed"
  trap - ERR
fi
