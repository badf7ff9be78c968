"""Signatures of the multi-node, Slurm, DeepSpeed-config and PEFT paths, and of the package
versions and chat templates a run depends on.

Each pattern quotes the shape of the message its component prints: DeepSpeed's config checks
(its batch assertion, pydantic's "N validation errors for DeepSpeed…Config"), PEFT's
``inject_adapter``, slurmstepd/srun/sbatch, glibc's resolver strings (``Name or service not
known``…) as Python, ssh, gloo and c10d pass them on, OpenSSH's connect errors, torch's c10d
TCPStore client, NCCL's socket and InfiniBand transports, transformers' version checks and
Python's ImportError, and the tokenizer's chat-template check. Numbers, hosts, ports, module and
package names are groups, never literals, so another thread's wording of the same message matches.
"""

from __future__ import annotations

import re

from backend.diagnosis.sigbase import Marker, Signature
from backend.diagnosis.sigbase import sig as _sig
from backend.i18n import N_

# glibc's (and macOS's, Windows') resolver strings: socket.gaierror, torch's "gai error: -2 - …"
# and ssh all end in one of them
_RESOLVER = (
    r"Name or service not known|Temporary failure in name resolution|No address associated with"
    r" hostname|nodename nor servname provided|Could not resolve hostname|\[Errno 11001\]"
    r" getaddrinfo failed|ValueError: host not found"
)
_ERRNO_CONNECT = (
    r"errno: (?:101|11[013])\b|Connection refused|Connection timed out|No route to host"
    r"|Network is unreachable"
)

# Public names that resolve wherever there is internet access (the Hub, PyPI, GitHub, PyTorch's
# and conda's download hosts): their lookup failing says the machine reaches no DNS server or no
# network at all, not that a name is wrong.
_PUBLIC = (
    r"(?:[\w-]+\.)*(?:huggingface\.co|hf\.co|hf-mirror\.com|modelscope\.cn|pypi\.org"
    r"|pythonhosted\.org|github\.com|githubusercontent\.com|pytorch\.org|anaconda\.org)"
)
_RESOLVER_GAI = (
    r"Temporary failure in name resolution|Name or service not known|nodename nor servname"
    r" provided|No address associated with hostname|\[Errno 11001\] getaddrinfo failed"
)
_PUBLIC_UNRESOLVED = (
    r"(?:host='(?P<pubhost>" + _PUBLIC + r")'|Failed to resolve '(?P<pubhost2>" + _PUBLIC + r")')"
    r"[^\n]{0,600}?(?P<gai>" + _RESOLVER_GAI + r")"
)
_PUBLIC_ANCHORS = (
    "name resolution",
    "Name or service",
    "nodename nor servname",
    "No address associated",
    "Errno 11001",
)

# Before the generic ones (port_in_use, nccl): these name a more specific cause.
NETWORK: tuple[Signature, ...] = (
    # urllib3's (requests', the Hub client's) connect error for a public host whose name did not
    # resolve: "HTTPSConnectionPool(host='H', port=P): Max retries exceeded … [Errno -3]
    # Temporary failure in name resolution", urllib3 2's "Failed to resolve 'H' (…)". Retried
    # while the run goes on (pip's "Retrying (Retry(…", the Hub's "… thrown while requesting"):
    # a warning, as signatures_hw's other retried network errors (escalate.py).
    _sig(
        "network_unreachable",
        "warning",
        N_("No network: a public host's name did not resolve (retrying)"),
        r"(?i:warn|retrying)[^\n]{0,800}?"
        + _PUBLIC_UNRESOLVED
        + r"|"
        + re.sub(r"\(\?P<\w+>", "(?:", _PUBLIC_UNRESOLVED)
        + r"[^\n]{0,400}?thrown while requesting",
        _PUBLIC_ANCHORS,
    ),
    _sig(
        "network_unreachable",
        "error",
        N_("No network: a public host's name did not resolve"),
        _PUBLIC_UNRESOLVED,
        _PUBLIC_ANCHORS,
    ),
    # glibc's resolver strings, as Python (socket.gaierror), ssh, torch and gloo print them.
    _sig(
        "hostname_resolution",
        "error",
        N_("A host name could not be resolved"),
        r"(?P<resolver>" + _RESOLVER + r")"
        r"|Unable to find address for:? (?P<iface>\S+)"
        r"|Unable to resolve hostname to a \(local\) address",
        (
            "Name or service",
            "name resolution",
            "No address associated",
            "nodename nor servname",
            "Could not resolve hostname",
            "Errno 11001",
            "ValueError: host not found",
            "Unable to find address",
            "Unable to resolve hostname",
        ),
    ),
    # OpenSSH's connect errors; DeepSpeed's and pdsh's report of a failed ssh to a node.
    _sig(
        "node_unreachable",
        "error",
        N_("A node does not answer over ssh"),
        r"ssh: connect to host (?P<host>\S+) port \d+: (?:Connection timed out|No route to host"
        r"|Connection refused|Network is unreachable|Operation timed out)"
        r"|Connection to (?P<host2>\S+) port \d+ timed out"
        r"|host=(?P<host3>\S+) was not reachable via ssh"
        r"|Command '\[?'?ssh [^']*?(?P<host4>[\w.-]+) hostname[^']*(?:'\]'|') returned non-zero exit"
        r" status 255"
        r"|ssh exited with exit code 255",
        (
            # the strerror (a capital: a cheap scan key), not "ssh: connect to host"
            "Connection timed out",
            "No route to host",
            "Connection refused",
            "Network is unreachable",
            "Operation timed out",
            "Connection to ",
            "was not reachable via ssh",
            "Command '",
            "xited with exit code 255",
        ),
    ),
    # torch's c10d store client (TCPStore, the rendezvous): node 0's port never answered.
    _sig(
        "rendezvous_timeout",
        "error",
        N_("A node could not reach the rendezvous (c10d store)"),
        r"The client socket has timed out after \S+ while trying to connect to"
        r"|RendezvousConnectionError|The connection to the C10d store has failed"
        # torch >= 2.4's socket wait on the store: "[c10d] waitForInput: socket ... timed out"
        r"|\[c10d\] waitForInput: .{0,400}?timed out after \d+ ?ms"
        r"|The client socket has failed to connect to (?:any network address|\S+ \((?:"
        + _ERRNO_CONNECT
        + r"))|TCP client failed to connect/validate to host|connect\(\) timed out\. Original timeout",
        (
            "The client socket has",
            "RendezvousConnectionError",
            "C10d store",
            "TCP client failed",
            "Original timeout",
            "waitForInput",
        ),
    ),
    # The bare error right after a TCPStore frame (torch 1.x: "RuntimeError: Connection refused").
    _sig(
        "rendezvous_timeout",
        "error",
        N_("A node could not reach the rendezvous (c10d store)"),
        r"(?:Error|Exception)\S*: (?:Connection (?:refused|timed out|reset by peer)|No route to host)",
        ("Error: Connection", "Error: No route", "Exception: Connection"),
        needs=("tcpstore", 12),
    ),
    # accelerate checks the port before it starts torchrun.
    _sig(
        "port_in_use",
        "error",
        N_("The rendezvous port is already in use"),
        r"Tried to launch distributed communication on port \S+ but another process is utilizing it"
        r"|another process is utilizing it",
        ("utilizing it",),
    ),
)

SLURM: tuple[Signature, ...] = (
    # slurmstepd's notice that it signalled the job or step: "*** STEP 12.0 ON node1 CANCELLED AT
    # <time> DUE TO PREEMPTION / NODE FAILURE, … / JOB REQUEUE ***" (the time limit's own words
    # are slurm_time_limit's, below), or without a reason (scancel: a user, an admin, a
    # dependency; or Slurm tearing down a step after another failure): a warning that
    # escalate.py makes the error when no other failure is in the log.
    _sig(
        "slurm_error",
        "error",
        N_("Slurm cancelled the job or its step"),
        r"\*\*\* (?P<entity>(?:JOB|STEP) \S+)(?: ON \S+)? CANCELLED AT \S+"
        r" DUE TO (?:PREEMPTION|NODE FAILURE|JOB REQUEUE)[^*\n]* \*\*\*",
        ("CANCELLED AT",),
    ),
    _sig(
        "slurm_error",
        "warning",
        N_("Slurm cancelled the job or its step"),
        r"\*\*\* (?P<entity>(?:JOB|STEP) \S+)(?: ON \S+)? CANCELLED AT \S+ \*\*\*",
        ("CANCELLED AT",),
    ),
    _sig(
        "slurm_time_limit",
        "error",
        N_("Slurm stopped the job at its time limit"),
        r"CANCELLED (?:AT \S+ )?DUE TO TIME LIMIT|Job not requeued because: timed-out",
        ("DUE TO TIME LIMIT", "timed-out"),
    ),
    _sig(
        "slurm_error",
        "error",
        N_("Slurm refused the job or its step"),
        r"\b(?:srun|sbatch|salloc): error: (?:[^:\n]{1,80}: )?(?P<slurm>"
        r"Invalid (?:generic resource|partition|account|qos|feature|Trackable RESource|node name)"
        r"[^\n]{0,80}|Requested (?:node configuration|partition configuration) is not available"
        r"|Requested time limit is invalid[^\n]{0,60}|Job violates accounting/QOS policy[^\n]{0,80}"
        r"|Unable to allocate resources: [^\n]{0,120}|Unable to create step for job \S+: [^\n]{0,120}"
        r"|Batch job submission failed: [^\n]{0,120})",
        # what Slurm refused (capitals: cheap scan keys), not "srun: error"
        ("Invalid ", "Requested ", "Unable to ", "Job violates", "Batch job submission"),
    ),
)

DEEPSPEED: tuple[Signature, ...] = (
    _sig(
        "deepspeed_config",
        "error",
        N_("DeepSpeed rejected its config: the batch sizes disagree"),
        r"Check batch related parameters|train_batch_size is not\s+equal to micro_batch_per_gpu"
        r"|Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided",
        ("Check batch related", "train_batch_size is not", "Either train_batch_size"),
        window=2,
    ),
    _sig(
        "deepspeed_config",
        "error",
        N_("DeepSpeed rejected a key in its config"),
        r"\d+ validation errors? for (?P<model>DeepSpeed\w*Config)",
        ("for DeepSpeed",),
    ),
    _sig(
        "deepspeed_config",
        "error",
        N_("ZeRO-Offload needs DeepSpeed's own optimizer"),
        r"ZeRO[- ]Offload can only work with DeepSpeed optimizers"
        r"|ZeRO[- ]Offload with a client provided optimizer|zero_force_ds_cpu_optimizer",
        ("ZeRO Offload", "ZeRO-Offload", "zero_force_ds_cpu"),
    ),
    _sig(
        "deepspeed_config",
        "error",
        N_("The DeepSpeed config file is missing or not JSON"),
        r"Expected a string path to an existing deepspeed config"
        r"|DeepSpeed config (?:file )?\S* ?(?:not found|does not exist)",
        ("Expected a string path", "DeepSpeed config"),
    ),
    # torch's extension loader runs ninja; under a DeepSpeed op's build (its frames or build
    # dir within the lines before or after) a failed ninja is DeepSpeed's op build.
    _sig(
        "deepspeed_op_build",
        "error",
        N_("A DeepSpeed op failed to compile"),
        r"Command '\['ninja', '-v'[^\]]*\]' returned non-zero exit status",
        ("'ninja'",),
        near=("ds_op_build", 60),
    ),
)

PEFT: tuple[Signature, ...] = (
    _sig(
        "peft_target_modules",
        "error",
        N_("LoRA's target modules are not in this model"),
        r"Target modules? (?P<mods>.{0,300}?) (?:not found in the base model|is not supported\."
        r" Currently, only the following modules are supported)"
        r"|Please specify `?target_modules`? in `?peft_config`?",
        ("not found in the base model", "Currently, only the following", "target_modules"),
    ),
)

VERSIONS: tuple[Signature, ...] = (
    _sig(
        "version_mismatch",
        "error",
        N_("A package the training code needs is not installed"),
        r"No package metadata was found for (?!The ')(?P<missing>[A-Za-z][\w.-]*)"
        r"|The '(?P<missing2>[A-Za-z][\w.-]*)[^']{0,40}' distribution was not found and is"
        r" required",
        ("No package metadata was found", "distribution was not found"),
    ),
    _sig(
        "version_mismatch",
        "error",
        N_("An installed package has the wrong version"),
        r"requires `?(?P<pkg>[A-Za-z][\w.-]*)\s*(?P<op>>=|==|<=|>|<)\s*(?P<ver>\d[\w.]*)`?:? Please run"
        r"|(?P<pkg2>[A-Za-z][\w.-]*)(?P<op2>>=|==|<=|<|>)(?P<ver2>\d[\w.]*) is required for a normal"
        r" functioning of this module, but found"
        r"|cannot import name '(?P<name>\w+)'(?: from '(?P<mod>[\w.]+)')?"
        r"|Failed to import (?P<mod2>[\w.]+) because of the following error"
        r"|module '(?P<mod3>(?:torch|transformers|accelerate|peft|deepspeed|trl|datasets"
        r"|bitsandbytes)[\w.]*)' has no attribute '\w+'",
        (
            "Please run",
            "normal functioning",
            "cannot import name",
            "Failed to import",
            "' has no attribute",
        ),
    ),
    _sig(
        "chat_template",
        "error",
        N_("The tokenizer has no chat template"),
        r"chat_template is not set|chat_template (?:choice )?is tokenizer_default but"
        r"|Cannot use (?:chat template functions|apply_chat_template\(\)) because",
        ("chat_template", "Cannot use chat template", "Cannot use apply_chat_template"),
    ),
)

# NCCL's socket and InfiniBand transports saying a connection broke: a real failure (error),
# unlike NCCL WARN about an unusable device or plugin (ibv_open_device, libibverbs, no plugin),
# which it falls back from at start-up. NCCL's SYSCHECK macro (src/include/checks.h) prints
# WARN("Call to %s failed : %s", name, strerror(errno)) for the socket calls (recv, send, and
# write/read in 2.4's include/socket.h).
NCCL_TRANSPORT: tuple[Signature, ...] = (
    _sig(
        "nccl",
        "error",
        N_("NCCL's network transport failed between nodes"),
        r"NCCL WARN (?:NET/IB\S* ?: Got completion from peer .{0,200}?with (?:error|status=) ?\d+"
        r"|.{0,120}?(?:Call to (?:recv|send|write|read)\b|Connect to|socketStartConnect|socketProgress"
        r"\w*|socketFinalizeAccept).{0,200}?(?:failed|closed by remote peer|wrong type)"
        r"|.{0,80}?Socket recv failed"
        r"|.{0,80}?NET/IB : .{0,80}?(?:async event|fatal))",
        ("NCCL WARN",),
    ),
)

CLUSTER_MARKERS: tuple[Marker, ...] = (
    # A TCPStore being created (the c10d rendezvous or env:// init): a bare connection error
    # right after it is the store's.
    Marker(
        "tcpstore",
        re.compile(r"TCPStore\(|_create_tcp_store|_env_rendezvous_handler|_create_c10d_store"),
        ("TCPStore(", "_create_tcp_store", "_env_rendezvous", "_create_c10d_store"),
    ),
    # DeepSpeed building or loading its ops, seen from the optimizer or engine frames.
    Marker(
        "ds_op_build",
        re.compile(
            r"FusedAdam\(|DeepSpeedCPUAdam|DeepSpeedEngine\(|deepspeed_init\("
            r"|deepspeed/ops/|Building extension module (?:cpu_adam|fused_adam|cpu_adagrad|fused_lamb)"
        ),
        (
            "FusedAdam(",
            "DeepSpeedCPUAdam",
            "DeepSpeedEngine(",
            "deepspeed_init(",
            "deepspeed/ops/",
            "Building extension module",
        ),
    ),
)


# "Failed to import X because of the following error (look up to see its traceback):" is
# transformers' wrapper: the error printed under it (an undefined symbol, a missing package) is
# the cause. Named by the only group that alternative sets.
IMPORT_WRAPPER_GROUP = "mod2"
VERSION_GROUPS = ("pkg", "pkg2", "name", "mod", "mod3", "missing", "missing2")


def import_wrapper_only(groups: dict[str, str]) -> bool:
    """True when a version_mismatch finding rests on transformers' import wrapper alone."""
    return IMPORT_WRAPPER_GROUP in groups and not any(k in groups for k in VERSION_GROUPS)


# (consequence, cause): when a log shows both, the cause is the root. A node that does not
# answer over ssh because its name does not resolve is a naming problem (fix the hostfile or
# /etc/hosts), not a down node.
YIELDS_TO: tuple[tuple[str, str], ...] = (
    ("node_unreachable", "hostname_resolution"),
    # slurmstepd cancels the job's steps too when the job reaches its time limit
    ("slurm_error", "slurm_time_limit"),
)
