"""The sbatch options a preset asks for. In the plan layer because the Slurm checks
(``sbatch --test-only``) and the runner (job.sbatch) must ask Slurm for the same job."""

from __future__ import annotations

from backend.preset.schema import Preset


def sbatch_options(preset: Preset) -> list[str]:
    slurm = preset.launch.slurm
    tasks = slurm.ntasks_per_node
    options = [f"--nodes={preset.launch.nnodes}", f"--ntasks-per-node={tasks}"]
    for flag, value in (
        ("partition", slurm.partition),
        ("account", slurm.account),
        ("qos", slurm.qos),
        ("time", slurm.time_limit),
        ("gpus-per-node", slurm.gpus_per_node),
        ("cpus-per-task", slurm.cpus_per_task),
        ("mem", slurm.mem),
    ):
        if value is not None:
            options.append(f"--{flag}={value}")
    return [*options, *slurm.extra_options]
