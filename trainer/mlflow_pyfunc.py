"""MLflow models-from-code entry of Strata's pyfunc (:mod:`trainer.mlflow_model`): MLflow copies this file
into the model directory and runs it on load, so the model holds code and weights, never a pickle."""

import trainer.mlflow_model as strata_model  # first: it turns MLflow's telemetry off before importing mlflow

strata_model.set_entry_model()
