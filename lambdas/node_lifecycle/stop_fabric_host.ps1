# Stops the Service Fabric host service on a node that was deactivated for removal, so the
# node goes Down and its state can be removed. Embedded in the NodeLifecycle stack's stop-host
# Run Command document (fabric_host.py stop_host_document), which runs nothing else.
# Idempotent: a service that is already stopped, or not installed, is fine.
$ErrorActionPreference = 'Stop'
$serviceName = 'FabricHostSvc'

$service = Get-Service -Name $serviceName -ErrorAction SilentlyContinue
if ($null -eq $service) {
    Write-Output "$serviceName is not installed; nothing to stop"
    exit 0
}

# Disabled first: the instance is about to be terminated, and a reboot in the meantime
# must not bring the node back into the cluster.
Set-Service -Name $serviceName -StartupType Disabled

if ($service.Status -ne 'Stopped') {
    Stop-Service -Name $serviceName -Force
    $service.WaitForStatus('Stopped', [TimeSpan]::FromMinutes(5))
}
Write-Output "$serviceName is $((Get-Service -Name $serviceName).Status)"
