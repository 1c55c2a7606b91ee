"""The CHE benchmark's runs (Delétang et al. 2023; Ruoss et al. 2023): a run's config (config),
its options (options), building and cross-checking its parts (setup), the training loop and its
evaluation at every length (loop, evaluation, plots), and many runs of one shape trained at once
(group, group_step, stack). The tasks are in lengen.tasks, the models in lengen.models."""
