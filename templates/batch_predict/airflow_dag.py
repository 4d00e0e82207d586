"""Airflow DAG: the batch_predict Flex Template once a day, for the DAG run's logical date.

Copy to your Composer/Airflow dags/ folder and set the Airflow Variables below. Each run passes
`run_date={{ ds }}`, so a backfill or a cleared task re-runs exactly that day and replaces that
day's output (the job stages its output and publishes it only when the run succeeds).
"""
import datetime

from airflow import DAG
from airflow.models import Variable
from airflow.providers.google.cloud.operators.dataflow import DataflowStartFlexTemplateOperator

PROJECT = Variable.get("tfdataflow_project", default_var="PROJECT")
REGION = Variable.get("tfdataflow_region", default_var="us-central1")
BUCKET = Variable.get("tfdataflow_bucket", default_var="BUCKET")

with DAG(
    dag_id="tfdataflow_batch_predict",
    schedule="0 2 * * *",
    start_date=datetime.datetime(2026, 1, 1),
    catchup=False,
    default_args={"retries": 2, "retry_delay": datetime.timedelta(minutes=10)},
    tags=["tfdataflow", "dataflow"],
) as dag:
    DataflowStartFlexTemplateOperator(
        task_id="batch_predict",
        project_id=PROJECT,
        location=REGION,
        wait_until_finished=True,
        body={
            "launchParameter": {
                "jobName": "tfdataflow-batch-predict-{{ ds_nodash }}",
                "containerSpecGcsPath": f"gs://{BUCKET}/templates/batch_predict.json",
                "parameters": {
                    "model_dir": f"gs://{BUCKET}/job/export",
                    "input": f"gs://{BUCKET}/incoming/{{date}}/*.csv",
                    "output": f"gs://{BUCKET}/predictions/{{date}}",
                    "run_date": "{{ ds }}",
                    "output_format": "jsonl",
                },
                "environment": {"tempLocation": f"gs://{BUCKET}/tmp", "maxWorkers": 10},
            }
        },
    )
