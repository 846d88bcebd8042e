"""What the provider puts in the UI, looked at in headless Chromium (Debian's chromium + chromium-driver).

Screenshots go to $E2E_ARTIFACTS (default artifacts/e2e/): trigger-form.png, task-extra-links.png,
task-local-run.png, job-page.png, job-list.png, job-page-running.png, job-page-stopped.png, connection-form.png.
Runs after test_deployment.py (it needs finished runs)."""

from __future__ import annotations

import json
import os
import time
import uuid

import pytest
from deployment import UI, Api, local_jobs
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
                                       if a.text.strip() in ("SageMaker training job",
                                                             "Training job logs (CloudWatch)")]
                   if len(d.find_elements(By.XPATH, "//a[normalize-space()='SageMaker training job']")) else False)
    hrefs = {a.text.strip(): a.get_attribute("href") for a in anchors}
    assert set(hrefs) == {"SageMaker training job", "Training job logs (CloudWatch)"}, hrefs
    assert all(h.startswith("https://console.aws.amazon.com/") for h in hrefs.values()), hrefs
    shot(browser, "task-extra-links.png")


PAGE_LINK = "Job page (local)"


def page_link(browser, dag_id: str, run_id: str) -> str:
    """The href of the task page's link to its local job's page (the task page shows it under Extra Links)."""
    browser.get(f"{UI}/dags/{dag_id}/runs/{run_id}/tasks/train/details")
    anchor = wait(browser, EC.presence_of_element_located((By.XPATH, f"//a[normalize-space()='{PAGE_LINK}']")))
    return anchor.get_attribute("href")


def status_text(driver) -> str:
    """The job page's status (empty while the page reloads, as it does once a followed job has ended)."""
    try:
        return driver.find_element(By.ID, "status").text
    except Exception:  # noqa: BLE001 - not there, or gone with the reload
        return ""


def host_lines(browser, host: str) -> list[str]:
    pre = browser.find_element(By.CSS_SELECTOR, f"pre[data-host='{host}']")
    return [line for line in pre.get_attribute("textContent").splitlines() if line]


def test_task_page_of_a_local_job_links_its_job_page_with_every_hosts_log_and_the_plot(browser):
    api = Api()
    run_id = latest_successful_run(api, "smdist_torch_distributed")
    job = api.xcom("smdist_torch_distributed", run_id, "train")["job_name"]
    href = page_link(browser, "smdist_torch_distributed", run_id)
    hrefs = [a.get_attribute("href") or "" for a in browser.find_elements(By.TAG_NAME, "a")]
    assert not [h for h in hrefs if h.startswith("file:")]
    assert not browser.find_elements(By.XPATH, "//a[normalize-space()='SageMaker training job']")
    assert href == f"{UI}/smdist/jobs/training/{job}", href
    shot(browser, "task-local-run.png")

    browser.get(href)
    wait(browser, text_present(f"training job {job}"))
    lines = {host: host_lines(browser, host) for host in ("algo-1", "algo-2")}  # every host's log
    assert all(lines.values()), {h: len(v) for h, v in lines.items()}
    epochs = [line for host_lines_ in lines.values() for line in host_lines_ if "train_loss=" in line]
    assert len(epochs) == 100, f"every epoch's line (the runs have 100 epochs): {len(epochs)}"
    assert "Completed" in status_text(browser)
    assert browser.find_elements(By.ID, "transitions") and "Training" in browser.find_element(By.ID, "transitions").text
    plot = wait(browser, EC.presence_of_element_located((By.ID, "plot")))
    wait(browser, lambda d: d.execute_script("return arguments[0].complete && arguments[0].naturalWidth", plot) > 0)
    assert "model.tar.gz" in browser.find_element(By.TAG_NAME, "body").text  # the outputs
    shot(browser, "job-page.png")

    browser.get(f"{UI}/plugin/smdist-jobs")  # the UI's navigation entry: the list, inside the UI
    frame = wait(browser, EC.presence_of_element_located((By.TAG_NAME, "iframe")))
    browser.switch_to.frame(frame)
    try:
        wait(browser, text_present(job))
        shot(browser, "job-list.png")
    finally:
        browser.switch_to.default_content()


def test_a_running_local_job_is_followed_and_stopped_from_its_page(browser):
    api = Api()
    dag_id = "e2e_local_job_page"
    run_id = api.trigger(dag_id)
    deadline = time.time() + 300
    while not (api.links(dag_id, run_id, "train") or {}).get(PAGE_LINK):  # stored when the job starts
        assert time.time() < deadline, f"no job page link: {api.task_instances(dag_id, run_id)}"
        time.sleep(2)
    href = page_link(browser, dag_id, run_id)
    job = href.rsplit("/", 1)[-1]
    browser.get(href)
    wait(browser, lambda d: all(d.find_elements(By.CSS_SELECTOR, f"pre[data-host='{h}']")
                                for h in ("algo-1", "algo-2")))
    before = {h: len(host_lines(browser, h)) for h in ("algo-1", "algo-2")}
    # the page follows the log while the job runs: new lines of every host arrive without a reload
    wait(browser, lambda d: all(len(host_lines(d, h)) >= before[h] + 3 for h in before))
    for host in before:
        ticks = [int(line.split(" tick ")[1].split()[0]) for line in host_lines(browser, host) if " tick " in line]
        assert ticks == list(range(len(ticks))), f"{host}: a line twice or one missed"
    shot(browser, "job-page-running.png")

    wait(browser, EC.element_to_be_clickable((By.ID, "stop"))).click()
    wait(browser, lambda d: "Click again" in d.find_element(By.ID, "stop").text)  # a second click confirms
    browser.find_element(By.ID, "stop").click()
    wait(browser, lambda d: "Stopped" in status_text(d), timeout=120)
    assert local_jobs()[job]["status"] == "Stopped"
    shot(browser, "job-page-stopped.png")
    deadline = time.time() + 120
    while api.run(dag_id, run_id)["state"] not in ("success", "failed"):  # its task ends with the job
        assert time.time() < deadline, "the run did not end after its job was stopped"
        time.sleep(2)


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
        for label in ("Backend", "AWS connection id", "AWS region", "Local job root",
                      "S3 endpoint URL (local backend)"):
            assert label in body, label
        dialog = browser.find_element(By.CSS_SELECTOR, "[role=dialog]")
        values = [e.get_attribute("value") for e in dialog.find_elements(By.TAG_NAME, "input")]
        for name, value in STORED.items():
            assert value in values or value in dialog.text, f"{name}={value} is not shown in its field"
        assert "Workers and the triggerer must see the same directory" in body  # the field's description
        shot(browser, "connection-form.png")
    finally:
        api.call("DELETE", f"/connections/{conn_id}")
