# Prepares a Windows Server 2022 instance to be a Service Fabric node, at first boot (EC2 user
# data). Both node types run it; a seed's fixed address is its primary private address, so
# nothing here differs by node type but the recorded type.
# The stack renders the quoted placeholders (a name in double braces); nothing else changes per node.
#
# Every step is logged to $LogFile. The outcome is written to $StatusFile as JSON
# (state running|succeeded|failed, the failed step and its error), which the create-cluster
# document and the scale-out automation read before they act. A failure also exits non-zero,
# so EC2Launch records it.
$ErrorActionPreference = 'Stop'
$ProgressPreference = 'SilentlyContinue'

$ClusterName = '{{ cluster_name }}'
$NodeType = '{{ node_type }}'
$Region = '{{ region }}'
$VpcCidr = '{{ vpc_cidr }}'
$NodePorts = '{{ node_ports }}'
$SetupPorts = '{{ setup_ports }}'
$SetupSources = '{{ setup_sources }}'
$ApplicationPorts = '{{ application_ports }}'
$CertificateSecret = '{{ certificate_secret }}'
$FileSystemDns = '{{ file_system_dns }}'
$SharedStoragePath = '{{ shared_storage_path }}'
$RuntimeVersion = '{{ runtime_version }}'
$RuntimeCabUrl = '{{ runtime_cab_url }}'
$RuntimeCab = '{{ runtime_cab }}'
$StandalonePackageUrl = '{{ standalone_package_url }}'
$StandalonePackageSha256 = '{{ standalone_package_sha256 }}'
$MicrosoftRoots = '{{ microsoft_roots }}'
$CloudWatchAgentVersion = '{{ cloudwatch_agent_version }}'
$CloudWatchAgentSigner = '{{ cloudwatch_agent_signer }}'
$LogGroup = '{{ log_group }}'
$MetricsNamespace = '{{ metrics_namespace }}'
$StatusFile = '{{ status_file }}'
$DeploymentAccount = '{{ deployment_account }}'
$DeploymentSecret = '{{ deployment_secret }}'
$ClusterCreatedParameter = '{{ cluster_created_parameter }}'
$TokenPolicy = 'HKLM:\SOFTWARE\Microsoft\Windows\CurrentVersion\Policies\System'

$Root = 'C:\ServiceFabric'
$LogFile = Join-Path $Root 'Logs\prepare-node.log'
$PackageDir = Join-Path $Root 'Package'
New-Item -ItemType Directory -Force -Path (Join-Path $Root 'Logs'), $PackageDir | Out-Null
$Outcome = [ordered]@{ state = 'running'; step = ''; error = ''; degraded = @(); nodeType = $NodeType }

function Write-Log {
    param([string]$Message)
    $line = '{0} {1}' -f (Get-Date).ToUniversalTime().ToString('o'), $Message
    Add-Content -Path $LogFile -Value $line
    Write-Output $line
}

function Save-Outcome {
    $Outcome | ConvertTo-Json | Set-Content -Path $StatusFile -Encoding UTF8
}

# Runs one named step. A required step that throws stops the preparation; an optional one is
# recorded as degraded and the node carries on (Service Fabric itself does not need it).
function Invoke-Step {
    param([string]$Name, [scriptblock]$Action, [switch]$Optional)
    $Outcome.step = $Name
    Save-Outcome
    Write-Log "step '$Name': started"
    try {
        & $Action
        Write-Log "step '$Name': done"
    } catch {
        if (-not $Optional) { throw }
        Write-Log "step '$Name': FAILED (optional, continuing): $($_.Exception.Message)"
        $Outcome.degraded += $Name
    }
}

function Get-ClusterSecret {
    (Get-SECSecretValue -SecretId $CertificateSecret -Region $Region).SecretString | ConvertFrom-Json
}

function Wait-Until {
    param([string]$What, [scriptblock]$Condition, [int]$TimeoutSeconds)
    $deadline = (Get-Date).AddSeconds($TimeoutSeconds)
    while (-not (& $Condition)) {
        if ((Get-Date) -gt $deadline) { throw "timed out after $TimeoutSeconds s waiting for $What" }
        Start-Sleep -Seconds 5
    }
}

# Valid Authenticode signature by $Organization (the signer's O=), and, given $Roots, a chain that
# ends at one of those root thumbprints; anything else throws.
function Assert-Signer {
    param([string]$Path, [string]$Organization, [string]$Roots)
    $signature = Get-AuthenticodeSignature -FilePath $Path
    if ($signature.Status -ne 'Valid') {
        throw "$Path signature status is '$($signature.Status)', not 'Valid': $($signature.StatusMessage)"
    }
    $signer = $signature.SignerCertificate
    if ($signer.Subject -notmatch "(^|, )O=$([regex]::Escape($Organization))(,|$)") {
        throw "$Path is signed by '$($signer.Subject)', not by $Organization"
    }
    if ($Roots) {
        # The signature itself was verified above (revocation included); the chain is built here only
        # to read its root. The intermediates come from the machine's stores or the certificates'
        # AIA links (the node's NAT egress): a chain that does not build is reported as such.
        $chain = New-Object Security.Cryptography.X509Certificates.X509Chain
        $chain.ChainPolicy.RevocationMode = [Security.Cryptography.X509Certificates.X509RevocationMode]::NoCheck
        if (-not $chain.Build($signer)) {
            $problems = ($chain.ChainStatus | ForEach-Object { $_.StatusInformation.Trim() }) -join '; '
            throw "$Path is signed by '$($signer.Subject)', whose chain did not build: $problems"
        }
        $root = $chain.ChainElements[$chain.ChainElements.Count - 1].Certificate
        if ($root.Thumbprint -notin ($Roots -split ',')) {
            throw "$Path is signed by '$($signer.Subject)' under root '$($root.Subject)' ($($root.Thumbprint)), not one of $Organization's roots $Roots"
        }
    }
    Write-Log "$Path signed by $($signer.Subject)"
}

try {
    Write-Log "preparing a $NodeType node of $ClusterName"

    Invoke-Step 'initialize data volume' {
        # The data volume is the raw EBS disk (NVMe model "Amazon Elastic Block Store"; "AWS PV
        # Disk" on Xen types); instance store disks, also raw at first boot, are left alone.
        $data = @(Get-Disk | Where-Object {
            $_.PartitionStyle -eq 'RAW' -and $_.FriendlyName -match 'Elastic Block Store|AWS PV'
        })
        if ($data.Count -gt 1) { throw "$($data.Count) raw EBS disks; expected the one data volume" }
        if ($data.Count -eq 1) {
            # D: may already name another volume (an instance store, a CD drive): move it aside.
            $taken = Get-CimInstance -ClassName Win32_Volume -Filter "DriveLetter = 'D:'"
            if ($taken) {
                $used = (Get-CimInstance -ClassName Win32_Volume).DriveLetter
                $free = [char[]](69..90) | ForEach-Object { "${_}:" } | Where-Object { $_ -notin $used } | Select-Object -First 1
                Set-CimInstance -InputObject $taken -Property @{ DriveLetter = $free }
                Write-Log "moved the volume that had D: to $free"
            }
            $data[0] | Initialize-Disk -PartitionStyle GPT -PassThru |
                New-Partition -DriveLetter D -UseMaximumSize |
                Format-Volume -FileSystem NTFS -NewFileSystemLabel 'ServiceFabric' -Confirm:$false | Out-Null
        }
        if ((Get-Volume -DriveLetter D -ErrorAction SilentlyContinue).FileSystemLabel -ne 'ServiceFabric') {
            throw 'D: is not the ServiceFabric data volume'
        }
        New-Item -ItemType Directory -Force -Path 'D:\SF' | Out-Null
    }

    Invoke-Step 'enable Remote Registry and Windows Firewall services' {
        # Cluster setup and AddNode.ps1 read the other machines' registry remotely, and
        # Service Fabric manages its own firewall rules through the firewall service.
        foreach ($service in 'RemoteRegistry', 'MpsSvc') {
            Set-Service -Name $service -StartupType Automatic
            Start-Service -Name $service
        }
    }

    Invoke-Step 'leave Windows Update to the patch run' {
        # Windows Update must not install or restart a node by itself: nodes could restart together,
        # none of them deactivated first. Notify before download (AUOptions 2, automatic updates
        # not turned off), as the Patch Orchestration Application sets every node
        # (microsoft/Service-Fabric-POA, NodeAgentNTService WindowsAutoUpdateUtility.SetAUOptions);
        # the patch state machine installs through AWS-RunPatchBaseline, one node at a time.
        $au = 'HKLM:\SOFTWARE\Policies\Microsoft\Windows\WindowsUpdate\AU'
        if (-not (Test-Path $au)) { New-Item -Path $au -Force | Out-Null }
        Set-ItemProperty -Path $au -Name NoAutoUpdate -Value 0 -Type DWord
        Set-ItemProperty -Path $au -Name AUOptions -Value 2 -Type DWord
    }

    Invoke-Step 'open firewall ports' {
        $rules = @(
            @{ Name = 'ServiceFabric-Nodes-TCP'; Protocol = 'TCP'; Ports = $NodePorts; From = $VpcCidr },
            # Windows remote administration only where cluster set-up needs it (stacks/constructs/node_security.py).
            @{ Name = 'ServiceFabric-Setup-TCP'; Protocol = 'TCP'; Ports = $SetupPorts; From = $SetupSources },
            # Load balancers keep the client's address, so applications accept any source; the
            # security groups decide who gets this far.
            @{ Name = 'ServiceFabric-Applications'; Protocol = 'TCP'; Ports = $ApplicationPorts; From = 'Any' }
        )
        Remove-NetFirewallRule -Name 'ServiceFabric-Nodes-UDP' -ErrorAction SilentlyContinue
        foreach ($rule in $rules) {
            Remove-NetFirewallRule -Name $rule.Name -ErrorAction SilentlyContinue
            New-NetFirewallRule -Name $rule.Name -DisplayName $rule.Name -Direction Inbound -Action Allow `
                -Protocol $rule.Protocol -LocalPort ($rule.Ports -split ',') -RemoteAddress ($rule.From -split ',') | Out-Null
        }
        # Only SYSTEM may reach the instance metadata service, and so the role's credentials: the
        # SSM and CloudWatch agents and this script run as SYSTEM; Service Fabric (NETWORK SERVICE),
        # its applications and the deployment account's tasks call no AWS API. Rule as in the EC2
        # User Guide, "Limit access to the Instance Metadata Service" (Windows): block Everyone (WD),
        # exception SYSTEM (SY).
        Remove-NetFirewallRule -Name 'Block-IMDS-Except-SYSTEM' -ErrorAction SilentlyContinue
        New-NetFirewallRule -Name 'Block-IMDS-Except-SYSTEM' -DisplayName 'Block-IMDS-Except-SYSTEM' -Direction Outbound `
            -Action Block -Protocol TCP -RemoteAddress '169.254.169.254', 'fd00:ec2::254' -LocalUser 'O:LSD:(D;;CC;;;SY)(A;;CC;;;WD)' | Out-Null
    }

    Invoke-Step 'import cluster certificate' {
        $secret = Get-ClusterSecret
        $pfx = Join-Path $env:TEMP 'cluster-certificate.pfx'
        [IO.File]::WriteAllBytes($pfx, [Convert]::FromBase64String($secret.pfx))
        try {
            $password = ConvertTo-SecureString -String $secret.pfx_password -AsPlainText -Force
            # A PFX that carries its chain imports several certificates: the cluster certificate
            # is the one with the private key; the chain goes where Windows trusts it from.
            $imported = @(Import-PfxCertificate -FilePath $pfx -CertStoreLocation 'Cert:\LocalMachine\My' -Password $password)
        } finally {
            Remove-Item -Force $pfx
        }
        $keyed = @($imported | Where-Object HasPrivateKey)
        if ($keyed.Count -ne 1) { throw "the cluster PFX holds $($keyed.Count) certificates with a private key; expected 1" }
        $cert = $keyed[0]
        $chain = @($imported | Where-Object { -not $_.HasPrivateKey })
        if ($cert.Subject -eq $cert.Issuer) {
            # A self-signed cluster certificate is its own CA: trust its public half.
            $chain += New-Object Security.Cryptography.X509Certificates.X509Certificate2(, $cert.RawData)
        }
        foreach ($issuer in $chain) {
            # Self-signed: a root the cluster certificate chains to (Root); else an intermediate (CA).
            $store = if ($issuer.Subject -eq $issuer.Issuer) { 'Root' } else { 'CA' }
            $target = New-Object Security.Cryptography.X509Certificates.X509Store($store, 'LocalMachine')
            $target.Open('ReadWrite')
            try { $target.Add($issuer) } finally { $target.Close() }
            if (-not $issuer.Equals($cert)) {
                Remove-Item -Path "Cert:\LocalMachine\My\$($issuer.Thumbprint)" -ErrorAction SilentlyContinue
            }
            Write-Log "trusted $($issuer.Subject) in LocalMachine\$store"
        }
        # Fabric runs as NETWORK SERVICE and must read the private key.
        $key = [Security.Cryptography.X509Certificates.RSACertificateExtensions]::GetRSAPrivateKey($cert)
        if ($key -is [Security.Cryptography.RSACng]) {
            $keyFile = Join-Path $env:ProgramData "Microsoft\Crypto\Keys\$($key.Key.UniqueName)"
        } else {
            $keyFile = Join-Path $env:ProgramData "Microsoft\Crypto\RSA\MachineKeys\$($key.CspKeyContainerInfo.UniqueKeyContainerName)"
        }
        $acl = Get-Acl -Path $keyFile
        $acl.AddAccessRule((New-Object Security.AccessControl.FileSystemAccessRule('NETWORK SERVICE', 'Read', 'Allow')))
        Set-Acl -Path $keyFile -AclObject $acl
        Set-Content -Path (Join-Path $Root 'cluster-certificate.thumbprint') -Value $cert.Thumbprint
        Write-Log "imported cluster certificate $($cert.Thumbprint)"
    }

    # Cluster creation (CreateServiceFabricCluster.ps1, run on one seed) administers every seed over
    # SMB and remote registry, so each seed needs a local administrator with the same password: the
    # stack's generated secret, which only seeds may read. Scaling nodes get none here: AddNode.ps1
    # administers only its own machine, and the add-node document makes a one-time password for it.
    # create_cluster.yaml disables the account and resets the policy on every seed once it is done.
    # A seed built after that (a rebuilt seed) gets no account at all: cluster creation, its one
    # user, is over once `telemetry cluster bootstrap` has written the cluster-created parameter
    # (telemetry/commands/cluster/bootstrap.py). Any answer but "no such parameter" stops the preparation,
    # rather than guess either way.
    $clusterCreated = $false
    if ($DeploymentSecret) {
        Invoke-Step 'look for a created cluster' {
            try {
                Get-SSMParameter -Name $ClusterCreatedParameter -Region $Region | Out-Null
                $script:clusterCreated = $true
            } catch [Amazon.SimpleSystemsManagement.Model.ParameterNotFoundException] { }
            Write-Log "cluster created: $clusterCreated"
        }
    }
    if ($DeploymentSecret -and $clusterCreated) {
        Invoke-Step 'retire deployment account' {
            Disable-LocalUser -Name $DeploymentAccount -ErrorAction SilentlyContinue
            Set-ItemProperty -Path $TokenPolicy -Name LocalAccountTokenFilterPolicy -Value 0 -Type DWord
        }
    }
    if ($DeploymentSecret -and -not $clusterCreated) {
        Invoke-Step 'create deployment account' {
            $secret = (Get-SECSecretValue -SecretId $DeploymentSecret -Region $Region).SecretString
            $password = ConvertTo-SecureString -String $secret -AsPlainText -Force
            if (Get-LocalUser -Name $DeploymentAccount -ErrorAction SilentlyContinue) {
                Set-LocalUser -Name $DeploymentAccount -Password $password
            } else {
                New-LocalUser -Name $DeploymentAccount -Password $password -PasswordNeverExpires -AccountNeverExpires | Out-Null
                Add-LocalGroupMember -Group 'Administrators' -Member $DeploymentAccount
            }
            # Lets that local account administer this machine remotely (UAC filters it otherwise).
            Set-ItemProperty -Path $TokenPolicy -Name LocalAccountTokenFilterPolicy -Value 1 -Type DWord
        }
    }

    # The shared file system (FSx for OpenZFS, NFS v3, which Windows' NFS client speaks) is
    # reached by its UNC path, not a drive letter: a mapped drive belongs to one logon session,
    # while the path works for every account, the services Service Fabric runs included.
    # Anonymous access maps to uid/gid 0, which the export lets write (no_root_squash). The
    # path is published machine-wide as SF_SHARED_STORAGE. A failure is recorded as degraded
    # instead of keeping the node out of the cluster.
    Invoke-Step 'mount shared storage' -Optional {
        Install-WindowsFeature -Name NFS-Client | Out-Null
        $nfs = 'HKLM:\SOFTWARE\Microsoft\ClientForNFS\CurrentVersion\Default'
        Set-ItemProperty -Path $nfs -Name AnonymousUid -Value 0 -Type DWord
        Set-ItemProperty -Path $nfs -Name AnonymousGid -Value 0 -Type DWord
        Restart-Service -Name NfsClnt
        $share = "\\$FileSystemDns$SharedStoragePath"
        $probe = Join-Path $share ".probe-$env:COMPUTERNAME"
        Set-Content -Path $probe -Value (Get-Date).ToString('o')
        Remove-Item -Path $probe
        [Environment]::SetEnvironmentVariable('SF_SHARED_STORAGE', $share, 'Machine')
        Write-Log "shared storage writable at $share (SF_SHARED_STORAGE)"
    }

    # The zip's SHA-256 is pinned in cdk.json (service_fabric.standalone_package_sha256) and checked
    # before anything in it is expanded; Microsoft publishes no hash to pin instead.
    Invoke-Step 'download Service Fabric standalone package' {
        if (-not (Test-Path (Join-Path $PackageDir 'CreateServiceFabricCluster.ps1'))) {
            $zip = Join-Path $env:TEMP 'ServiceFabricStandalone.zip'
            Invoke-WebRequest -Uri $StandalonePackageUrl -OutFile $zip -UseBasicParsing
            $actual = (Get-FileHash -Algorithm SHA256 -Path $zip).Hash
            if (-not $StandalonePackageSha256) {
                Write-Log "standalone package NOT PINNED (service_fabric.standalone_package_sha256); its SHA-256 is $actual"
            } elseif ($actual -ne $StandalonePackageSha256) {
                Remove-Item -Force $zip
                throw "standalone package SHA-256 mismatch: expected $StandalonePackageSha256, actual $actual"
            }
            Expand-Archive -Path $zip -DestinationPath $PackageDir -Force
            Remove-Item -Force $zip
        }
        Write-Log "standalone package $RuntimeVersion in $PackageDir"
    }

    # The runtime cluster setup and AddNode.ps1 install (-FabricRuntimePackagePath); left to
    # themselves they take whatever Microsoft's feed offers. Microsoft publishes no checksums for
    # it. Cluster setup's own check (BestPracticesAnalyzer.CheckIsCabFile -> FileSignatureVerifier,
    # microsoft/service-fabric) accepts any valid signature; this one wants Microsoft Corporation's
    # code-signing certificate under Microsoft's own roots ($MicrosoftRoots: naming.py).
    Invoke-Step 'download Service Fabric runtime' {
        if (-not (Test-Path $RuntimeCab)) {
            Invoke-WebRequest -Uri $RuntimeCabUrl -OutFile $RuntimeCab -UseBasicParsing
        }
        try {
            Assert-Signer -Path $RuntimeCab -Organization 'Microsoft Corporation' -Roots $MicrosoftRoots
        } catch {
            Remove-Item -Force $RuntimeCab  # a later run downloads it again
            throw
        }
        Write-Log "runtime $RuntimeVersion in $RuntimeCab"
    }

    Invoke-Step 'install CloudWatch agent' -Optional {
        $msi = Join-Path $env:TEMP 'amazon-cloudwatch-agent.msi'
        # The global bucket: the versioned folders are published there (stacks/config.py).
        $url = "https://amazoncloudwatch-agent.s3.amazonaws.com/windows/amd64/$CloudWatchAgentVersion/amazon-cloudwatch-agent.msi"
        Invoke-WebRequest -Uri $url -OutFile $msi -UseBasicParsing
        Assert-Signer -Path $msi -Organization $CloudWatchAgentSigner
        $install = Start-Process -FilePath 'msiexec.exe' -ArgumentList @('/i', $msi, '/qn') -Wait -PassThru
        if ($install.ExitCode -ne 0) { throw "msiexec exited with $($install.ExitCode)" }
        $agentConfig = @{
            logs = @{ logs_collected = @{
                files = @{ collect_list = @(@{ file_path = $LogFile; log_group_name = $LogGroup; log_stream_name = '{instance_id}/prepare-node' }) }
                windows_events = @{ collect_list = @(
                    @{ event_name = 'System'; event_levels = @('ERROR', 'WARNING'); log_group_name = $LogGroup; log_stream_name = '{instance_id}/system' },
                    @{ event_name = 'Application'; event_levels = @('ERROR', 'WARNING'); log_group_name = $LogGroup; log_stream_name = '{instance_id}/application' }
                ) }
            } }
            metrics = @{
                namespace = $MetricsNamespace
                append_dimensions = @{ InstanceId = '${aws:InstanceId}' }
                metrics_collected = @{
                    Memory = @{ measurement = @('% Committed Bytes In Use') }
                    LogicalDisk = @{ measurement = @('% Free Space'); resources = @('C:', 'D:') }
                }
            }
        }
        $configFile = Join-Path $Root 'cloudwatch-agent.json'
        $agentConfig | ConvertTo-Json -Depth 10 | Set-Content -Path $configFile -Encoding ASCII
        $ctl = Join-Path $env:ProgramFiles 'Amazon\AmazonCloudWatchAgent\amazon-cloudwatch-agent-ctl.ps1'
        & $ctl -a fetch-config -m ec2 -s -c "file:$configFile"
    }

    $Outcome.state = 'succeeded'
    $Outcome.step = ''
    Save-Outcome
    Write-Log "node preparation succeeded (degraded: $($Outcome.degraded -join ', '))"
} catch {
    $Outcome.state = 'failed'
    $Outcome.error = $_.Exception.Message
    Save-Outcome
    Write-Log "node preparation FAILED in step '$($Outcome.step)': $($_.Exception.Message)"
    exit 1
}
