"""AppWorld's apps in-process, over JSON lines on stdin/stdout (run under AppWorld's own interpreter).

Run with the interpreter that has ``appworld==0.1.3.post1`` installed and ``appworld install`` done
(pydantic 1; see ``textwm.envs.appworld.apps_python``)::

    .venv-appworld/bin/python src/textwm/envs/appworld/apps_runner.py

Stdlib + appworld only; textwm never imports this file, it starts it as a subprocess. Every app DB is a
fresh in-memory SQLite DB built from the apps' own SQLModel models (the construction AppWorld's
``Requester`` uses with ``create_db=True``) and filled from the ``world`` of a ``reset``; no official
AppWorld data is needed, except for ``official``.

Protocol: one JSON object per input line; one JSON line answers it: ``{"result": ...}`` or
``{"error": "..."}``. Anything AppWorld prints goes to stderr, as do tracebacks.

  {"op": "reset", "world": W}        -> {"result": {"apps", "datetime", "batches": [B...], "row_counts"}}
  {"op": "official", "task_id": T}   -> {"result": {"instruction", "datetime", "email", "phone_number"}}
                                        (AppWorld's own task from $APPWORLD_ROOT/data/tasks/T)
  {"op": "call", "name": "spotify__login", "parameters": {...}}
                                     -> {"result": <the API's JSON>} or {"error": <what the agent sees>}
  {"op": "task"}                     -> {"result": {"instruction", "status", "answer"}}  (supervisor Task)
  {"op": "evaluate"}                 -> {"result": AppWorld's evaluation (official tasks only)}
  {"op": "records", "app": A, "model": M}  -> {"result": [row dicts]}
  {"op": "specs"}                    -> {"result": [every public API's spec]}  (api_specs.json)
  {"op": "close"}                    -> {"result": "closed"}, then exit

World ``W``: ``datetime`` (ISO, the frozen clock), ``apps`` (admin, supervisor, api_docs always added),
``user`` {first_name, last_name, email, phone_number, birthday?}, ``hidden_accounts`` {app: password} (accounts
the supervisor does not list), ``accounts`` {app: password} (the
user's verified account in each app + the supervisor's account passwords), ``user_ids`` {app: id} (the
user's id in an app, where the records refer to it), ``task`` {instruction}, ``batches``: a list of
{table, app, model, rows}, inserted in order, each row with its own id if it has one. A row that fails
AppWorld's validation or checks is not inserted; its batch answer ``B`` = {table, app, model, given,
inserted, errors: [{index, error}]} says why. Rows are inserted as AppWorld's ``save`` does (validation,
uniqueness, foreign keys, ``_pre_change``) but without ``_post_change``, so the counts a row states
(like_count, review_count) are kept.

Access tokens: the agent never passes ``access_token`` (a given one is dropped); the token of the last
successful ``<app>__login`` is injected into that app's token-taking APIs; a successful logout drops it.
Error texts are AppWorld's own (``Response status code is 401:\\n{"message":"..."}``, ``No API named
'x' found in the spotify app.``).
"""

import json
import os
import sys
import traceback
import warnings
from datetime import datetime

# appworld (and its sqlmodel) is imported in the functions that use it: it is installed only in AppWorld's own
# interpreter (apps_python), and this file stays importable without it, in textwm's own venv.
PROTOCOL_OUT = sys.stdout
sys.stdout = sys.stderr  # whatever appworld prints must not corrupt the protocol stream
warnings.filterwarnings("ignore")

DEFAULT_DATETIME = "2023-05-18T12:00:00"
MANDATORY_APPS = ("admin", "supervisor", "api_docs")
RANDOM_SEED = 100
MAX_ERRORS_PER_BATCH = 20


def log(message):
    print(f"[apps_runner] {message}", file=sys.stderr, flush=True)


def models_of(app_name):
    # AppWorld's interpreter only (see the note above PROTOCOL_OUT)
    from appworld.common.utils import import_models_module

    return import_models_module(app_name)


def parse_datetimes(model, row):
    """ISO strings -> datetime for the model's datetime fields (the rows come as JSON)."""
    out = dict(row)
    for name, value in row.items():
        field = model.__fields__.get(name)
        if field is None:
            raise ValueError(f"{model.__name__} has no field {name!r}")
        if isinstance(value, str) and isinstance(field.type_, type) and issubclass(field.type_, datetime):
            out[name] = datetime.fromisoformat(value)
    return out


def insert(model, row):
    """Insert one row as ``SQLModel.save`` creates one, keeping a given id; raises what AppWorld raises."""
    # AppWorld's interpreter only (see the note above PROTOCOL_OUT)
    from sqlmodel import Session

    record = model.create(**parse_datetimes(model, row))  # the model's validator (types, constraints)
    record.update_class_db()
    with Session(model.db.engine) as session:
        record._validate_dependents_exist(session)  # foreign keys -> HTTPException 409
        record.self_validate("create")
        record.set_record_hash()
        record._pre_change("create", None)  # computed fields (file_system's tilde_path)
        session.add(record)
        model.commit_session(session)  # uniqueness -> HTTPException 409
        record.set_db_home_path()
        record.set_search_text()
        session.refresh(record)
    record.increment_model_hash()
    return record


def error_text(exception):
    detail = getattr(exception, "detail", None)
    return f"{type(exception).__name__}: {detail if detail is not None else exception}"


class Apps:
    """The apps of one world at a time (see the module docstring)."""

    def __init__(self):
        self.counter = 0
        self.requester = None
        self.official = None
        self.db_home = None
        self.apps = []
        self.tokens = {}
        self._public_docs = {}

    def public_docs(self, app_name):
        if app_name not in self._public_docs:
            # AppWorld's interpreter only (see the note above PROTOCOL_OUT)
            from appworld.api_docs import prepare_api_docs

            docs = prepare_api_docs(app_name, include_private_apis=False)
            self._public_docs[app_name] = {doc["api_name"]: doc for doc in docs}
        return self._public_docs[app_name]

    def close(self):
        # AppWorld's interpreter only (see the note above PROTOCOL_OUT)
        from appworld.apps.api_lib import clear_local_dbs_cache

        if self.official is not None:
            self.official.close()  # also closes its requester and unfreezes time
            self.official = None
        elif self.requester is not None:
            self.requester.close()  # unfreezes time
        if self.db_home is not None:
            clear_local_dbs_cache(self.db_home)
        self.requester, self.db_home, self.tokens = None, None, {}

    # --- reset -------------------------------------------------------------------------------------

    def reset(self, world):
        # AppWorld's interpreter only (see the note above PROTOCOL_OUT)
        from appworld.apps import get_all_apps
        from appworld.requester import Requester

        self.close()
        self.counter += 1
        apps = list(dict.fromkeys([*MANDATORY_APPS, *(world.get("apps") or get_all_apps())]))
        unknown = [a for a in apps if a not in get_all_apps()]
        if unknown:
            raise ValueError(f"unknown apps {unknown}; AppWorld has {sorted(get_all_apps())}")
        self.db_home = f":memory:textwm_{os.getpid()}_{self.counter}"
        date_time = datetime.fromisoformat(world.get("datetime") or DEFAULT_DATETIME)
        self.requester = Requester(to_db_home_path=self.db_home, from_db_home_path=self.db_home,
                                   date_and_time=date_time, random_seed=world.get("random_seed", RANDOM_SEED),
                                   load_apps=apps, raise_on_failure=False, max_num_requests=None, create_db=True)
        self.apps = list(self.requester.apps)
        self.forget_logouts()
        self.seed_api_docs()
        self.seed_people(world)
        batches = [self.insert_batch(batch) for batch in world.get("batches", [])]
        return {"apps": self.apps, "datetime": date_time.isoformat(), "batches": batches,
                "row_counts": self.row_counts()}

    def forget_logouts(self):
        """Logout blacklists are module-level; a new world re-issues byte-identical JWTs (frozen time,
        same random seed), so the tokens logged out in earlier worlds must be forgotten."""
        # AppWorld's interpreter only (see the note above PROTOCOL_OUT)
        from appworld.common.utils import import_apis_module

        for app_name in self.apps:
            manager = getattr(import_apis_module(app_name), "logging_manager", None)
            if manager is not None:
                manager.blacklisted_tokens.clear()

    def seed_api_docs(self):
        docs = models_of("api_docs").ApiDoc
        rows = [docs(app_name_=d["app_name"], api_name=d["api_name"], path=d["path"], method=d["method"],
                     description=d["description"], parameters=d["parameters"],
                     response_schemas=d["response_schemas"])
                for app_name in self.apps if app_name != "admin" for d in self.public_docs(app_name).values()]
        docs.save_all(rows)

    def seed_people(self, world):
        """The user in admin (ground truth) and supervisor (what the agent sees), an account per app."""
        user = world["user"]
        person = {k: user[k] for k in ("first_name", "last_name", "email", "phone_number")}
        person["birthday"] = user.get("birthday", "1990-01-01")
        main_user = insert(models_of("admin").MainUser, person)
        supervisor = insert(models_of("supervisor").Supervisor, person)
        user_ids = world.get("user_ids", {})
        listed = world.get("accounts", {})
        # hidden_accounts: the user has them, the supervisor does not list their passwords (the paper's worlds:
        # a phone account whose login fails with the other apps' credentials, as in its released demos).
        for app_name, password in {**world.get("hidden_accounts", {}), **listed}.items():
            if app_name not in self.apps:
                raise ValueError(f"an account for app {app_name!r}, which is not loaded")
            insert(models_of("admin").AccountPassword,
                   {"main_user_id": main_user.id, "account_name": app_name, "password": password})
            if app_name in listed:
                insert(models_of("supervisor").AccountPassword,
                       {"supervisor_id": supervisor.id, "account_name": app_name, "password": password})
            user_model = models_of(app_name).User
            account = {"first_name": user["first_name"], "last_name": user["last_name"], "password": password}
            for name in ("email", "phone_number"):
                if name in user_model.__fields__:
                    account[name] = user[name]
            if "verified" in user_model.__fields__:
                account["verified"] = True
            if app_name in user_ids:
                account["id"] = user_ids[app_name]
            insert(user_model, account)
        if world.get("task"):
            insert(models_of("supervisor").Task, {"supervisor_id": supervisor.id, **world["task"]})

    def insert_batch(self, batch):
        model = getattr(models_of(batch["app"]), batch["model"])
        errors, inserted = [], 0
        for index, row in enumerate(batch["rows"]):
            try:
                insert(model, row)
                inserted += 1
            except Exception as exception:  # noqa: BLE001 -- AppWorld raises HTTPException/ValidationError/...; reported
                errors.append({"index": index, "error": error_text(exception)})
        if errors:
            log(f"{batch['table']} -> {batch['app']}.{batch['model']}: {len(errors)} of {len(batch['rows'])} "
                f"rows not inserted, first: {errors[0]['error'][:300]}")
        return {"table": batch["table"], "app": batch["app"], "model": batch["model"],
                "given": len(batch["rows"]), "inserted": inserted, "errors": errors[:MAX_ERRORS_PER_BATCH]}

    def row_counts(self):
        counts = {}
        for app_name in self.apps:
            if app_name != "api_docs":
                sizes = {m.__name__: m.size() for m in models_of(app_name).SQLModel.models()}
                counts[app_name] = {name: n for name, n in sizes.items() if n}
        return counts

    def reset_official(self, task_id):
        # AppWorld's interpreter only (see the note above PROTOCOL_OUT)
        from appworld.environment import AppWorld

        self.close()
        self.official = AppWorld(task_id=task_id, experiment_name="textwm_real", raise_on_failure=False)
        self.requester = self.official.requester
        self.apps = list(self.requester.apps)
        self.forget_logouts()
        task = self.official.task
        supervisor = task.supervisor
        return {"instruction": task.instruction, "datetime": task.datetime.isoformat(),
                "email": supervisor.email, "phone_number": supervisor.phone_number}

    # --- calls -------------------------------------------------------------------------------------

    def call(self, name, parameters):
        """One API call: its JSON, or an ``{"error": ...}`` answer with AppWorld's text."""
        if self.requester is None:
            raise ValueError("no world loaded: send a reset first")
        if not isinstance(name, str) or "__" not in name:
            return {"error": f"Invalid API name {name!r}: expected '<app_name>__<api_name>'."}
        app_name, api_name = name.split("__", 1)
        if app_name not in self.apps or app_name == "admin":  # AppWorld's ApiCollection texts
            return {"error": f"No app named '{app_name}' found."}
        docs = self.public_docs(app_name)
        if api_name not in docs:
            return {"error": f"No API named '{api_name}' found in the {app_name} app."}
        parameters = dict(parameters or {})
        parameters.pop("access_token", None)
        if app_name in self.tokens and any(p["name"] == "access_token" for p in docs[api_name]["parameters"]):
            parameters["access_token"] = self.tokens[app_name]
        try:
            response = self.requester._request(app_name, api_name, raise_on_failure=False, **parameters)
        except Exception as exception:  # noqa: BLE001 -- an app raised inside the in-process server: the agent sees it
            traceback.print_exc(file=sys.stderr)
            log(f"{name} raised {type(exception).__name__}")
            return {"error": error_text(exception)}
        if response.status_code != 200:  # AppWorld's own failure text (Requester.raise_if_failure)
            # AppWorld's interpreter only (see the note above PROTOCOL_OUT)
            from appworld.requester import METHOD_NOT_ALLOWED_MESSAGE

            text = METHOD_NOT_ALLOWED_MESSAGE if "Method Not Allowed" in response.text else response.text
            return {"error": f"Response status code is {response.status_code}:\n{text}"}
        result = response.json()
        if api_name == "login" and isinstance(result, dict) and "access_token" in result:
            self.tokens[app_name] = result["access_token"]
        elif api_name == "logout":
            self.tokens.pop(app_name, None)
        return {"result": result}

    def task(self):
        tasks = models_of("supervisor").Task.all()
        if not tasks:
            raise ValueError("no active task")
        return tasks[0].to_dict(humanize=True)

    def evaluate(self):
        if self.official is None:
            raise ValueError("evaluate needs an official task (op 'official')")
        return self.official.evaluate(suppress_errors=True).to_dict(stats_only=False)

    def records(self, app_name, model_name):
        model = getattr(models_of(app_name), model_name)
        return [json.loads(json.dumps(r.to_dict(), default=str, sort_keys=True)) for r in model.all()]


def api_specs():
    """Every public API of every app, from the apps' own FastAPI routes (``prepare_api_docs``)."""
    # AppWorld's interpreter only (see the note above PROTOCOL_OUT)
    from appworld.api_docs import prepare_api_docs
    from appworld.apps import get_all_apps

    specs = []
    for app_name in get_all_apps():
        for doc in prepare_api_docs(app_name, include_private_apis=False):
            parameters = [{"name": p["name"], "type": p["type"], "required": p["required"], "default": p["default"],
                           "description": p["description"], "constraints": p["constraints"],
                           "hidden_from_agent": p["name"] == "access_token"} for p in doc["parameters"]]
            specs.append({"app": app_name, "api_name": doc["api_name"], "name": f"{app_name}__{doc['api_name']}",
                          "method": doc["method"], "path": doc["path"], "description": doc["description"],
                          "requires_access_token": any(p["name"] == "access_token" for p in parameters),
                          "parameters": parameters, "response_schemas": doc["response_schemas"]})
    return specs


def handle(apps, request):
    """The answer to one request (``{"result": ...}`` / ``{"error": ...}``)."""
    op = request.get("op")
    if op == "call":
        return apps.call(request.get("name"), request.get("parameters"))
    handlers = {
        "reset": lambda: apps.reset(request.get("world") or {}),
        "official": lambda: apps.reset_official(request["task_id"]),
        "task": apps.task,
        "evaluate": apps.evaluate,
        "records": lambda: apps.records(request["app"], request["model"]),
        "specs": api_specs,
    }
    if op not in handlers:
        return {"error": f"unknown op {op!r}; ops: call, close, {', '.join(sorted(handlers))}"}
    return {"result": handlers[op]()}


def serve(lines, write):
    apps = Apps()
    for line in lines:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            if request.get("op") == "close":
                apps.close()
                write({"result": "closed"})
                return
            answer = handle(apps, request)
        except Exception as exception:  # noqa: BLE001 -- answered as an error and logged, the runner goes on
            traceback.print_exc(file=sys.stderr)
            answer = {"error": error_text(exception)}
        write(answer)


def main():
    def write(answer):
        PROTOCOL_OUT.write(json.dumps(answer, default=str) + "\n")
        PROTOCOL_OUT.flush()

    serve(sys.stdin, write)


if __name__ == "__main__":
    main()
