"""Studies beyond the sweep, each writing <stem>.csv/.json/.md/.png (results_io) that a run's report includes.

model_eval: each variant swapped into every layer of the pretrained all-MiniLM-L6-v2 (harness.models.minilm).
tasks: tiny transformers trained from scratch per variant on MQAR and ListOps (task_data, task_model, task_training).
deploy: each variant through torch.export, ONNX, onnxruntime and WebAssembly (deploy_targets, deploy_wasm, web/).
They use the report's page, renderers, figure helpers, study tables and row outcomes (harness.report.study_outcomes,
harness.report.deploy_table): the studies sit above the report, which reads their .json and imports none of them.
"""
