"""What the provider puts in the UI, looked at in headless Chromium (Debian's chromium + chromium-driver).

Screenshots go to $E2E_ARTIFACTS (default artifacts/e2e/): trigger-form.png, task-extra-links.png,
task-local-run.png, connection-form.png. Runs after test_deployment.py (it needs finished runs)."""

from __future__ import annotations

import json
import os
import time
import uuid

import pytest
from deployment import UI, Api
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

ARTIFACTS = os.environ.get("E2E_ARTIFACTS", os.path.join(os.getcwd(), "artifacts", "e2e"))
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1440,2000")
WAIT = 90  # the UI is slow to render on a loaded 2-core machine


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    options = webdriver.ChromeOptions()
    options.binary_location = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    driver = webdriver.Chrome(service=Service(os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")),
                              options=options)
    driver.set_page_load_timeout(WAIT)
    os.makedirs(ARTIFACTS, exist_ok=True)
    try:
        login(driver)
        yield driver
    finally:
        driver.quit()


def wait(driver, condition, timeout: float = WAIT):
    try:
        return WebDriverWait(driver, timeout).until(condition)
    except Exception:
        shot(driver, f"failed-{os.environ.get('PYTEST_CURRENT_TEST', 'wait').split('::')[-1].split(' ')[0]}.png")
        raise


def login(driver) -> None:
    driver.get(f"{UI}/auth/login?next=%2F")
    wait(driver, EC.presence_of_element_located((By.NAME, "username"))).send_keys(os.environ["AIRFLOW_LOCAL_USER"])
    driver.find_element(By.NAME, "password").send_keys(os.environ["AIRFLOW_LOCAL_PASSWORD"] + Keys.ENTER)
    wait(driver, lambda d: "/auth/login" not in d.current_url)


def shot(driver, name: str) -> str:
    path = os.path.join(ARTIFACTS, name)
    time.sleep(1)  # let the last render settle
    driver.save_screenshot(path)
    return path


def text_present(text: str):
    return lambda d: text in d.find_element(By.TAG_NAME, "body").text


def latest_successful_run(api: Api, dag_id: str) -> str:
    runs = api.get(f"/dags/{dag_id}/dagRuns", state="success", order_by="-start_date", limit=1)["dag_runs"]
    assert runs, f"no successful run of {dag_id} (test_deployment.py makes them)"
    return runs[0]["dag_run_id"]


def test_trigger_form_explains_every_param(browser):
    browser.get(f"{UI}/dags/smdist_torch_distributed")
    button = wait(browser, EC.element_to_be_clickable(
        (By.XPATH, "//button[normalize-space()='Trigger' or .//text()[normalize-space()='Trigger']]")))
    button.click()
    instance_type = wait(browser, EC.presence_of_element_located((By.ID, "element_instance_type")))
    # free text with a list of proposals (GPU types among them)
    options = [o.get_attribute("value") for o in
               browser.find_elements(By.CSS_SELECTOR, f"datalist#{instance_type.get_attribute('list')} option")]
    assert "ml.g5.xlarge" in options and "ml.m5.xlarge" in options, options
    body = browser.find_element(By.TAG_NAME, "body").text
    for described in ("Passes over the training data", "Batch size of each worker process",
                      "local backend's scratch space", "Wait for jobs in the triggerer"):
        assert described in body, described
    shot(browser, "trigger-form.png")
    assert browser.find_elements(By.CSS_SELECTOR, "[id=element_deferrable], [name=element_deferrable]"), \
        "the run chooses deferrable in the form"


def test_task_page_shows_console_links_for_a_sagemaker_job(browser):
    api = Api()
    run_id = latest_successful_run(api, "e2e_sagemaker_on_moto")
    browser.get(f"{UI}/dags/e2e_sagemaker_on_moto/runs/{run_id}/tasks/train/details")
    wait(browser, text_present("Extra Links"))
    anchors = wait(browser, lambda d: [a for a in d.find_elements(By.TAG_NAME, "a")
                                       if a.text.strip() in ("SageMaker training job", "Training job logs (CloudWatch)")]
                   if len(d.find_elements(By.XPATH, "//a[normalize-space()='SageMaker training job']")) else False)
    hrefs = {a.text.strip(): a.get_attribute("href") for a in anchors}
    assert set(hrefs) == {"SageMaker training job", "Training job logs (CloudWatch)"}, hrefs
    assert all(h.startswith("https://console.aws.amazon.com/") for h in hrefs.values()), hrefs
    shot(browser, "task-extra-links.png")


def test_task_page_of_a_local_job_has_no_dead_links(browser):
    api = Api()
    run_id = latest_successful_run(api, "smdist_torch_distributed")
    browser.get(f"{UI}/dags/smdist_torch_distributed/runs/{run_id}/tasks/train/details")
    wait(browser, text_present("train"))
    time.sleep(3)  # the links query is the last to render
    hrefs = [a.get_attribute("href") or "" for a in browser.find_elements(By.TAG_NAME, "a")]
    assert not [h for h in hrefs if h.startswith("file:")]
    assert not browser.find_elements(By.XPATH, "//a[normalize-space()='SageMaker training job']")
    shot(browser, "task-local-run.png")


#: one value per field of the smdist connection (the edit form lists the fields a connection stores)
STORED = {"backend": "local", "aws_conn_id": "aws_default", "region_name": "eu-west-1",
          "local_root": "/srv/smdist-jobs", "s3_endpoint_url": "http://127.0.0.1:9000"}


def test_smdist_connection_form_shows_its_own_fields(browser):
    api = Api()
    conn_id = f"smdist_ui_{uuid.uuid4().hex[:6]}"
    api.call("POST", "/connections", json={"connection_id": conn_id, "conn_type": "smdist",
                                            "extra": json.dumps(STORED)})
    try:
        browser.get(f"{UI}/connections")
        row = wait(browser, EC.presence_of_element_located((By.XPATH, f"//tr[.//text()[contains(., '{conn_id}')]]")))
        row.find_element(By.XPATH, ".//button[contains(@aria-label, 'Edit')]").click()
        wait(browser, text_present("Extra Fields"))
        standard = browser.find_element(By.CSS_SELECTOR, "[role=dialog]").text
        for hidden in ("Host", "Login", "Password", "Port", "Schema"):
            assert hidden not in standard.split("\n"), f"standard field {hidden} is shown"
        wait(browser, EC.element_to_be_clickable(
            (By.XPATH, "//*[@role='dialog']//button[normalize-space()='Extra Fields']"))).click()
        wait(browser, text_present("Local job root"))
        body = browser.find_element(By.TAG_NAME, "body").text
        for label in ("Backend", "AWS connection id", "AWS region", "Local job root", "S3 endpoint URL (local backend)"):
            assert label in body, label
        dialog = browser.find_element(By.CSS_SELECTOR, "[role=dialog]")
        values = [e.get_attribute("value") for e in dialog.find_elements(By.TAG_NAME, "input")]
        for name, value in STORED.items():
            assert value in values or value in dialog.text, f"{name}={value} is not shown in its field"
        assert "Workers and the triggerer must see the same directory" in body  # the field's description
        shot(browser, "connection-form.png")
    finally:
        api.call("DELETE", f"/connections/{conn_id}")
